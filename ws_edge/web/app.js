// turnstream web client: one page, plain JS, no build step and nothing loaded from elsewhere.
//
// It speaks the edge's protocol (ws_edge/messages.py, README "Protocol") over a WebSocket to
// the host that served the page. The parts that are easy to get wrong, and why they are so:
// - Reconnecting: a dropped connection never stops an answer on the server, so the client
//   reconnects with backoff, authenticates again and sends `response.resume` with the last
//   (epoch, offset) it has of each unfinished answer; the edge replays what came after.
//   Frames at or before that position are dropped here too (a replay must never duplicate
//   text), a frame of a newer epoch (another attempt) starts the text over, and
//   `response.done.text` is the final word on what the answer says.
// - Turns not yet accepted when the connection dropped are sent again with the same
//   `client_turn_id`, which the edge answers once.
// - Microphone audio goes up as 16 kHz PCM16 (`audio.append`); the recording is kept as well,
//   so a turn whose stream died with its connection is sent inline instead.
// - Spoken answers (`response.audio`) are played in `index` order, gaplessly, on one clock.
//
// window.turnstream is a small hook for tests and debugging (state, answers, positions).
"use strict";

(() => {
  const BACKOFF_MIN_MS = 250;
  const BACKOFF_MAX_MS = 8000;
  const MIC_RATE = 16000; // what the edge expects from audio.append unless told otherwise
  const MIC_SEND_SAMPLES = 3200; // one audio.append per 200 ms of speech
  const MIC_MAX_S = 60; // a forgotten microphone stops by itself
  const MAX_IMAGE_BYTES = 8 * 1024 * 1024; // the edge has its own, stricter, limits
  const AUTH_ERRORS = new Set(["unauthenticated", "token_invalid", "token_expired"]);
  const CLOSE_POLICY_VIOLATION = 1008; // the edge gave up on our authentication
  const FEEDBACK_LABELS = {
    thumbs_up: "thanks!",
    thumbs_down: "noted, thanks",
    regenerate: "asked again",
    stop: "stopped",
    copy_code: "copied",
    abandon: "abandoned",
  };

  const $ = (id) => document.getElementById(id);
  const ui = {
    state: $("state"),
    speech: $("speech"),
    newChat: $("new-chat"),
    auth: $("auth"),
    token: $("token"),
    banner: $("banner"),
    messages: $("messages"),
    composer: $("composer"),
    attachments: $("attachments"),
    image: $("image"),
    mic: $("mic"),
    input: $("input"),
    send: $("send"),
    stop: $("stop"),
    answerTemplate: $("answer-template"),
  };

  // ---- the test hook -----------------------------------------------------------------------
  const hook = {
    state: "idle", // connecting | connected | reconnecting | disconnected
    states: ["idle"], // every state in order (a short-lived one still shows here)
    answers: {}, // turn_id -> the answer's text as shown
    lastPosition: {}, // turn_id -> {epoch, offset}: the last logged frame received
    streamed: {}, // turn_id -> the text the deltas had built when response.done came
    done: {}, // turn_id -> {text, finish_reason, error}
    feedback: {}, // turn_id -> feedback kinds the edge recorded
    frames: [], // the latest frame types received (debugging)
    sent: [], // the latest frame types sent
    errors: [], // every error frame
    sessions: 0, // session.ready count (one per connection that authenticated)
    micSeconds: 0, // how much the microphone has recorded (of the current or last take)
    dropConnection,
  };
  window.turnstream = hook;

  function remember(list, item, limit = 400) {
    list.push(item);
    if (list.length > limit) list.splice(0, list.length - limit);
  }

  // ---- small helpers -----------------------------------------------------------------------
  function randomId(prefix) {
    const bytes = new Uint8Array(12);
    crypto.getRandomValues(bytes); // crypto.randomUUID needs a secure context; this does not
    return `${prefix}-${Array.from(bytes, (b) => b.toString(16).padStart(2, "0")).join("")}`;
  }

  function bytesToBase64(bytes) {
    let binary = "";
    for (let i = 0; i < bytes.length; i += 0x8000) {
      binary += String.fromCharCode.apply(null, bytes.subarray(i, i + 0x8000));
    }
    return btoa(binary);
  }

  function base64ToBytes(text) {
    const binary = atob(text);
    const bytes = new Uint8Array(binary.length);
    for (let i = 0; i < binary.length; i++) bytes[i] = binary.charCodeAt(i);
    return bytes;
  }

  function showBanner(text) {
    ui.banner.textContent = text;
    ui.banner.hidden = !text;
  }

  function scrollToEnd() {
    const m = ui.messages;
    if (m.scrollHeight - m.scrollTop - m.clientHeight < 120) m.scrollTop = m.scrollHeight;
  }

  // ---- the token ---------------------------------------------------------------------------
  // From ?token= (then taken out of the address bar, so it is not bookmarked or shown), or the
  // field; kept for this tab only so that a reload reconnects.
  const TOKEN_KEY = "turnstream.token";

  function initialToken() {
    const params = new URLSearchParams(location.search);
    const fromUrl = params.get("token");
    if (fromUrl) {
      sessionStorage.setItem(TOKEN_KEY, fromUrl);
      params.delete("token");
      const query = params.toString();
      history.replaceState(null, "", location.pathname + (query ? `?${query}` : ""));
      return fromUrl;
    }
    return sessionStorage.getItem(TOKEN_KEY);
  }

  // ---- connection --------------------------------------------------------------------------
  const conn = {
    ws: null,
    ready: false, // session.ready received on this socket
    everReady: false,
    token: initialToken(),
    attempts: 0,
    timer: null,
    authFailed: false,
    speech: null, // the speech options the user wants ({voice} or null)
  };

  function setState(state) {
    if (hook.state === state) return;
    hook.state = state;
    hook.states.push(state);
    ui.state.textContent = state;
    ui.state.dataset.state = state;
  }

  function socketUrl() {
    const scheme = location.protocol === "https:" ? "wss:" : "ws:";
    return `${scheme}//${location.host}/`;
  }

  function connect() {
    clearTimeout(conn.timer);
    conn.timer = null;
    if (!conn.token) {
      ui.auth.hidden = false;
      setState("disconnected");
      return;
    }
    conn.authFailed = false;
    setState(conn.everReady ? "reconnecting" : "connecting");
    let ws;
    try {
      ws = new WebSocket(socketUrl());
    } catch (err) {
      showBanner(`cannot connect: ${err}`);
      scheduleReconnect();
      return;
    }
    conn.ws = ws;
    conn.ready = false;
    // the token goes in a message rather than the URL: URLs end up in logs
    ws.onopen = () => {
      if (ws === conn.ws) ws.send(JSON.stringify({ type: "session.authenticate", token: conn.token }));
    };
    ws.onmessage = (event) => onFrame(ws, event.data);
    ws.onclose = (event) => onClose(ws, event);
    ws.onerror = () => {}; // a close event follows
  }

  function onClose(ws, event) {
    if (ws !== conn.ws) return;
    conn.ws = null;
    conn.ready = false;
    updateButtons();
    if (conn.authFailed || event.code === CLOSE_POLICY_VIOLATION) {
      setState("disconnected");
      ui.auth.hidden = false;
      return;
    }
    scheduleReconnect();
  }

  function scheduleReconnect() {
    setState("reconnecting");
    clearTimeout(conn.timer);
    const ceiling = Math.min(BACKOFF_MAX_MS, BACKOFF_MIN_MS * 2 ** conn.attempts);
    conn.attempts += 1;
    const delay = ceiling / 2 + (Math.random() * ceiling) / 2; // jitter: not all at once
    conn.timer = setTimeout(connect, delay);
  }

  /** Cut the connection as a network failure would (the server is not asked): what follows
   * is the client's own recovery, reconnecting, re-authenticating and resuming. */
  function dropConnection() {
    const ws = conn.ws;
    if (!ws) return false;
    conn.ws = null;
    conn.ready = false;
    ws.onopen = ws.onmessage = ws.onclose = null;
    try {
      ws.close(4000, "connection dropped");
    } catch (_err) {
      // already closing
    }
    updateButtons();
    scheduleReconnect();
    return true;
  }

  function send(message) {
    const ws = conn.ws;
    if (!ws || ws.readyState !== WebSocket.OPEN || !conn.ready) return false;
    ws.send(JSON.stringify(message));
    remember(hook.sent, message.type);
    return true;
  }

  window.addEventListener("online", () => {
    if (hook.state === "reconnecting") connect();
  });

  // ---- turns -------------------------------------------------------------------------------
  let conversationId = randomId("conv");
  const turnsByClientId = new Map();
  const turnsById = new Map();
  const turnOrder = []; // oldest first

  function newTurn({ question, images = [], audio = null, label = "" }) {
    const turn = {
      clientTurnId: randomId("ct"),
      conversationId,
      question, // the text sent
      images, // [{data (base64), url (object URL for the preview)}]
      audio, // {streamId, session, pcm (Uint8Array), sampleRate} for a voice turn
      turnId: null,
      text: "",
      heard: "", // what the audio was heard as
      epoch: null,
      offset: null,
      finished: false,
      failed: false,
      submits: 0,
      retries: 0,
      stopRequested: false,
      resuming: false,
      fromStart: false, // resumed without a position: the replay starts from the beginning
    };
    renderTurn(turn, label);
    turnsByClientId.set(turn.clientTurnId, turn);
    turnOrder.push(turn);
    submit(turn);
    updateButtons();
    return turn;
  }

  function submit(turn) {
    const message = {
      type: "turn.create",
      conversation_id: turn.conversationId,
      client_turn_id: turn.clientTurnId,
    };
    if (turn.question) message.text = turn.question;
    const parts = turn.images.map((image) => ({ type: "image", data: image.data }));
    if (turn.audio) {
      const { audio } = turn;
      if (turn.submits === 0 && audio.session === hook.sessions && conn.ready) {
        // the edge holds this session's stream: name it
        parts.push({ type: "audio", stream_id: audio.streamId, sample_rate: audio.sampleRate });
      } else {
        // the stream went with its connection: send the recording itself
        parts.push({
          type: "audio",
          data: bytesToBase64(audio.pcm),
          format: "pcm16",
          sample_rate: audio.sampleRate,
        });
      }
    }
    if (parts.length) message.parts = parts;
    if (send(message)) turn.submits += 1;
    setStatus(turn, conn.ready ? "sending" : "waiting for connection");
  }

  function renderTurn(turn, label) {
    const user = document.createElement("article");
    user.className = "msg user";
    user.dataset.testid = "question";
    user.textContent = label || turn.question;
    for (const image of turn.images) {
      const img = document.createElement("img");
      img.src = image.url;
      img.alt = "attached image";
      user.append(img);
    }
    turn.heardEl = document.createElement("span");
    turn.heardEl.className = "heard";
    turn.heardEl.dataset.testid = "heard";
    user.append(turn.heardEl);

    const answer = ui.answerTemplate.content.firstElementChild.cloneNode(true);
    answer.dataset.clientTurnId = turn.clientTurnId;
    turn.el = answer;
    turn.textEl = answer.querySelector(".text");
    turn.statusEl = answer.querySelector(".status");
    turn.feedbackEl = answer.querySelector(".feedback");
    turn.buttons = {
      up: answer.querySelector(".thumbs-up"),
      down: answer.querySelector(".thumbs-down"),
      regenerate: answer.querySelector(".regenerate"),
    };
    turn.buttons.up.addEventListener("click", () => giveFeedback(turn, "thumbs_up"));
    turn.buttons.down.addEventListener("click", () => giveFeedback(turn, "thumbs_down"));
    turn.buttons.regenerate.addEventListener("click", () => regenerate(turn));
    ui.messages.append(user, answer);
    scrollToEnd();
  }

  function setStatus(turn, status, detail = "") {
    turn.el.dataset.status = status;
    turn.statusEl.textContent = detail ? `${status} · ${detail}` : status;
  }

  function setText(turn, text) {
    turn.text = text;
    turn.textEl.textContent = text;
    if (turn.turnId) hook.answers[turn.turnId] = text;
    scrollToEnd();
  }

  function appendText(turn, text) {
    turn.text += text;
    turn.textEl.append(text); // a text node: never parsed as HTML
    if (turn.turnId) hook.answers[turn.turnId] = turn.text;
    scrollToEnd();
  }

  /** Whether a logged frame is new to us: not at or before the position we have, not from an
   * older attempt. A frame of a newer attempt starts the answer's text over. Frames without
   * a position (an edge before resume) are always taken. */
  function takePosition(turn, frame) {
    const { epoch, offset } = frame;
    if (epoch == null || offset == null) return true;
    if (turn.epoch != null) {
      if (epoch < turn.epoch) return false;
      if (epoch === turn.epoch && turn.offset != null && offset <= turn.offset) return false;
      if (epoch > turn.epoch) setText(turn, "");
    }
    turn.epoch = epoch;
    turn.offset = offset;
    hook.lastPosition[turn.turnId] = { epoch, offset };
    return true;
  }

  function resumeAll() {
    for (const turn of turnsById.values()) {
      if (turn.finished) continue;
      const message = { type: "response.resume", turn_id: turn.turnId };
      if (turn.epoch != null && turn.offset != null) {
        message.epoch = turn.epoch;
        message.offset = turn.offset;
        turn.fromStart = false;
      } else {
        turn.fromStart = true; // no position: everything is replayed, so start clean
      }
      turn.resuming = true;
      setStatus(turn, "resuming");
      send(message);
    }
  }

  function unfinished() {
    return turnOrder.filter((turn) => !turn.finished && !turn.failed);
  }

  function updateButtons() {
    ui.stop.disabled = unfinished().length === 0 && !player.playing();
  }

  // ---- frames from the edge ----------------------------------------------------------------
  function onFrame(ws, data) {
    if (ws !== conn.ws || typeof data !== "string") return;
    let frame;
    try {
      frame = JSON.parse(data);
    } catch (_err) {
      return;
    }
    remember(hook.frames, frame.type);
    const handler = handlers[frame.type];
    if (handler) handler(frame);
    updateButtons();
  }

  function turnOf(frame) {
    return turnsById.get(frame.turn_id) || null;
  }

  const handlers = {
    "session.ready": () => {
      conn.ready = true;
      conn.everReady = true;
      conn.attempts = 0;
      hook.sessions += 1;
      ui.auth.hidden = true;
      showBanner("");
      setState("connected");
      if (conn.speech) send({ type: "session.update", speech: conn.speech });
      resumeAll();
      for (const turn of turnOrder) {
        if (!turn.turnId && !turn.failed) submit(turn); // same client_turn_id: answered once
      }
    },

    "session.updated": (frame) => {
      ui.speech.checked = frame.speech != null;
    },

    "turn.accepted": (frame) => {
      const turn = turnsByClientId.get(frame.client_turn_id);
      if (!turn || turn.turnId) return;
      turn.turnId = frame.turn_id;
      turnsById.set(turn.turnId, turn);
      turn.el.dataset.turnId = turn.turnId;
      hook.answers[turn.turnId] = turn.text;
      setStatus(turn, "waiting");
      if (turn.stopRequested) send({ type: "turn.cancel", turn_id: turn.turnId });
    },

    "input.transcript": (frame) => {
      const turn = turnOf(frame);
      if (!turn || !takePosition(turn, frame)) return;
      turn.heard = frame.text;
      turn.heardEl.textContent = `heard: “${frame.text}”`;
    },

    "response.started": (frame) => {
      const turn = turnOf(frame);
      if (!turn || turn.finished || !takePosition(turn, frame)) return;
      turn.model = frame.model;
      setStatus(turn, "streaming", frame.model);
    },

    "response.delta": (frame) => {
      const turn = turnOf(frame);
      if (!turn || turn.finished || !takePosition(turn, frame)) return;
      if (turn.el.dataset.status !== "streaming") setStatus(turn, "streaming", turn.model || "");
      appendText(turn, frame.text);
    },

    "response.restarted": (frame) => {
      // another worker took the turn: what was shown is void, the answer comes again
      const turn = turnOf(frame);
      if (!turn || turn.finished) return;
      setText(turn, "");
      turn.offset = null; // the new attempt's frames (a newer epoch) follow
      setStatus(turn, "restarted", frame.reason);
      player.stop(turn.turnId);
    },

    "response.retracted": (frame) => {
      // the safety check cut it: the canned reply replaces everything shown
      const turn = turnOf(frame);
      if (!turn) return;
      setText(turn, frame.text);
      setStatus(turn, "retracted", frame.reason);
    },

    "response.resumed": (frame) => {
      const turn = turnOf(frame);
      if (!turn) return;
      turn.resuming = false;
      if (frame.status === "restarted" || frame.status === "expired") {
        // restarted: a new attempt follows from its start; expired: what we missed is gone,
        // the rest follows and response.done carries the whole text
        setText(turn, "");
        turn.epoch = frame.epoch;
        turn.offset = null;
        player.stop(turn.turnId);
      } else if (turn.fromStart) {
        setText(turn, "");
      }
      turn.fromStart = false;
      if (!turn.finished) setStatus(turn, "streaming", turn.model || "");
    },

    "response.done": (frame) => {
      const turn = turnOf(frame);
      if (!turn || turn.finished) return;
      hook.streamed[turn.turnId] = turn.text;
      hook.done[turn.turnId] = {
        text: frame.text,
        finish_reason: frame.finish_reason,
        error: frame.error || null,
      };
      if (frame.epoch != null && frame.offset != null) {
        turn.epoch = frame.epoch;
        turn.offset = frame.offset;
        hook.lastPosition[turn.turnId] = { epoch: frame.epoch, offset: frame.offset };
      }
      turn.finished = true;
      turn.resuming = false;
      setText(turn, frame.text); // authoritative, whatever the deltas said
      const reason = frame.finish_reason;
      const labels = { stop: "done", cancelled: "stopped", length: "cut at max tokens" };
      if (frame.error) {
        setStatus(turn, reason === "safety" ? "safety" : "error", frame.error.message);
      } else {
        const tokens = frame.usage ? `${frame.usage.completion_tokens} tokens` : "";
        setStatus(turn, labels[reason] || reason, [frame.model, tokens].filter(Boolean).join(" · "));
      }
      for (const button of Object.values(turn.buttons)) button.disabled = false;
      if (turn.stopRequested && reason === "cancelled") giveFeedback(turn, "stop");
    },

    "response.audio": (frame) => player.enqueue(frame),

    "response.audio.done": (frame) => {
      if (frame.reason !== "completed") player.stop(frame.turn_id);
    },

    "response.truncated": (frame) => {
      const turn = turnOf(frame);
      if (turn) setStatus(turn, "interrupted", `heard up to ${Math.round(frame.audio_end_ms)} ms`);
    },

    "feedback.recorded": (frame) => {
      const kinds = hook.feedback[frame.turn_id] || (hook.feedback[frame.turn_id] = []);
      kinds.push(frame.kind);
      const turn = turnOf(frame);
      if (!turn) return;
      turn.el.dataset.feedback = kinds.join(" ");
      turn.feedbackEl.textContent = FEEDBACK_LABELS[frame.kind] || frame.kind;
      if (frame.kind === "thumbs_up" || frame.kind === "thumbs_down") {
        turn.buttons.up.setAttribute("aria-pressed", String(frame.kind === "thumbs_up"));
        turn.buttons.down.setAttribute("aria-pressed", String(frame.kind === "thumbs_down"));
      }
    },

    error: (frame) => onError(frame),
  };

  function onError(frame) {
    hook.errors.push(frame);
    if (AUTH_ERRORS.has(frame.code)) {
      conn.authFailed = true;
      conn.token = null;
      sessionStorage.removeItem(TOKEN_KEY);
      ui.auth.hidden = false;
      showBanner(`${frame.code}: ${frame.message}`);
      const ws = conn.ws; // a new token makes a new connection (answers resume there)
      conn.ws = null;
      conn.ready = false;
      if (ws) ws.close();
      setState("disconnected");
      return;
    }
    const byClient = frame.client_turn_id && turnsByClientId.get(frame.client_turn_id);
    const turn = byClient || (frame.turn_id && turnsById.get(frame.turn_id)) || null;
    if (!turn) {
      showBanner(`${frame.code}: ${frame.message}`);
      return;
    }
    if (byClient && !turn.turnId) {
      if (frame.retryable && turn.retries < 3) {
        // nothing was accepted: the same client_turn_id again, after the edge's hint
        turn.retries += 1;
        const delay = frame.retry_after_ms ?? 1000 * turn.retries;
        setStatus(turn, "retrying", frame.code);
        setTimeout(() => !turn.turnId && !turn.failed && submit(turn), delay);
        return;
      }
      turn.failed = true;
    }
    if (turn.resuming) turn.resuming = false;
    setStatus(turn, "error", `${frame.code}: ${frame.message}`);
  }

  // ---- user actions ------------------------------------------------------------------------
  const pendingImages = []; // attached, not yet sent

  function sendComposer() {
    const question = ui.input.value.trim();
    if (!question && pendingImages.length === 0) return;
    if (conn.speech) player.unlock(); // a click: when a browser lets a page start audio
    newTurn({ question, images: pendingImages.splice(0) });
    ui.input.value = "";
    ui.attachments.replaceChildren();
  }

  function stopAnswers() {
    for (const turn of unfinished()) {
      turn.stopRequested = true;
      if (turn.turnId) send({ type: "turn.cancel", turn_id: turn.turnId });
    }
    const heard = player.interruptAll();
    for (const [turnId, audioEndMs] of heard) {
      const turn = turnsById.get(turnId);
      // an answer that finished generating but is still being spoken: keep what was heard
      if (turn && turn.finished) {
        send({ type: "turn.interrupt", turn_id: turnId, audio_end_ms: audioEndMs });
      }
    }
    updateButtons();
  }

  function giveFeedback(turn, kind) {
    if (!turn.turnId || !turn.finished) return;
    send({ type: "feedback", turn_id: turn.turnId, kind });
  }

  function regenerate(turn) {
    if (!turn.finished) return;
    giveFeedback(turn, "regenerate");
    const question = turn.question || turn.heard;
    const images = turn.images;
    const audio = !question && turn.audio ? { ...turn.audio, session: -1 } : null; // inline
    if (!question && images.length === 0 && !audio) return;
    newTurn({ question, images, audio, label: question || "(voice message, again)" });
  }

  function newChat() {
    stopAnswers();
    conversationId = randomId("conv");
    ui.messages.replaceChildren();
  }

  async function attachImage(file) {
    if (!file) return;
    if (!/^image\/(png|jpeg|webp|gif)$/.test(file.type)) {
      showBanner("images: PNG, JPEG, WebP or GIF");
      return;
    }
    if (file.size > MAX_IMAGE_BYTES) {
      showBanner(`image too large (${Math.round(file.size / 1048576)} MiB)`);
      return;
    }
    const data = bytesToBase64(new Uint8Array(await file.arrayBuffer()));
    const image = { data, url: URL.createObjectURL(file), name: file.name };
    pendingImages.push(image);
    const chip = document.createElement("span");
    const img = document.createElement("img");
    img.src = image.url;
    img.alt = file.name;
    const remove = document.createElement("button");
    remove.type = "button";
    remove.textContent = "×";
    remove.title = "remove";
    remove.addEventListener("click", () => {
      pendingImages.splice(pendingImages.indexOf(image), 1);
      chip.remove();
    });
    chip.append(img, remove);
    ui.attachments.append(chip);
  }

  // ---- speech out --------------------------------------------------------------------------
  // response.audio pieces (PCM s16 LE mono) are played in index order on one AudioContext
  // clock, back to back; a piece that comes late plays when it comes.
  const player = {
    ctx: null,
    cursor: 0, // when the next piece starts, in the context's time
    turns: new Map(), // turn_id -> {next, pending: Map(index -> frame), pieces: [{source, start, duration}]}

    unlock() {
      if (!this.ctx && window.AudioContext) this.ctx = new AudioContext();
      if (this.ctx && this.ctx.state === "suspended") this.ctx.resume();
    },

    enqueue(frame) {
      if (frame.format && frame.format !== "pcm16") return;
      let state = this.turns.get(frame.turn_id);
      if (!state) {
        state = { next: 0, pending: new Map(), pieces: [], stopped: false };
        this.turns.set(frame.turn_id, state);
      }
      if (state.stopped || frame.index < state.next || state.pending.has(frame.index)) return;
      state.pending.set(frame.index, frame);
      while (state.pending.has(state.next)) {
        const next = state.pending.get(state.next);
        state.pending.delete(state.next);
        state.next += 1;
        this.play(state, next);
      }
      updateButtons();
    },

    play(state, frame) {
      this.unlock();
      const ctx = this.ctx;
      if (!ctx) return;
      const bytes = base64ToBytes(frame.audio);
      const count = bytes.length >> 1;
      if (count === 0) return;
      const view = new DataView(bytes.buffer, bytes.byteOffset, count * 2);
      const buffer = ctx.createBuffer(1, count, frame.sample_rate);
      const channel = buffer.getChannelData(0);
      for (let i = 0; i < count; i++) channel[i] = view.getInt16(2 * i, true) / 32768;
      const source = ctx.createBufferSource();
      source.buffer = buffer;
      source.connect(ctx.destination);
      const start = Math.max(this.cursor, ctx.currentTime + 0.03);
      source.start(start);
      this.cursor = start + buffer.duration;
      state.pieces.push({ source, start, duration: buffer.duration });
      source.onended = () => updateButtons();
    },

    /** Milliseconds of the turn's speech played so far. */
    heardMs(state) {
      const now = this.ctx ? this.ctx.currentTime : 0;
      let seconds = 0;
      for (const piece of state.pieces) {
        seconds += Math.min(piece.duration, Math.max(0, now - piece.start));
      }
      return seconds * 1000;
    },

    playing() {
      if (!this.ctx) return false;
      return this.cursor > this.ctx.currentTime && this.turns.size > 0;
    },

    stop(turnId) {
      const state = this.turns.get(turnId);
      if (!state) return 0;
      const heard = this.heardMs(state);
      for (const piece of state.pieces) {
        try {
          piece.source.stop();
        } catch (_err) {
          // not started or already stopped
        }
      }
      state.pieces = [];
      state.pending.clear();
      state.stopped = true;
      if (this.ctx) this.cursor = Math.min(this.cursor, this.ctx.currentTime);
      return heard;
    },

    /** Stop every answer being spoken; which were cut, and how much of each was heard. */
    interruptAll() {
      const heard = [];
      const now = this.ctx ? this.ctx.currentTime : 0;
      for (const [turnId, state] of this.turns) {
        const last = state.pieces[state.pieces.length - 1];
        const speaking = last && last.start + last.duration > now;
        if (speaking) heard.push([turnId, this.stop(turnId)]);
      }
      return heard;
    },
  };

  function setSpeech(on) {
    conn.speech = on ? { voice: "joe" } : null;
    if (on) player.unlock();
    send({ type: "session.update", speech: conn.speech });
  }

  // ---- microphone --------------------------------------------------------------------------
  /** Mono float samples at the device's rate -> PCM16 at `outRate` (averaging each output
   * sample's window: a crude low-pass, enough for speech recognition). */
  class Downsampler {
    constructor(inRate, outRate) {
      this.step = inRate / outRate;
      this.position = 0;
      this.sum = 0;
      this.count = 0;
    }

    push(input) {
      const out = new Int16Array(Math.ceil(input.length / this.step) + 1);
      let n = 0;
      for (let i = 0; i < input.length; i++) {
        this.sum += input[i];
        this.count += 1;
        this.position += 1;
        if (this.position >= this.step) {
          this.position -= this.step;
          const sample = Math.max(-1, Math.min(1, this.sum / this.count));
          out[n++] = sample < 0 ? sample * 0x8000 : sample * 0x7fff;
          this.sum = 0;
          this.count = 0;
        }
      }
      return out.subarray(0, n);
    }
  }

  function pcmBytes(samples) {
    const bytes = new Uint8Array(samples.length * 2);
    const view = new DataView(bytes.buffer);
    for (let i = 0; i < samples.length; i++) view.setInt16(2 * i, samples[i], true);
    return bytes;
  }

  const mic = {
    recording: false,
    stream: null,
    ctx: null,
    nodes: [],
    streamId: null,
    session: 0, // the session whose buffer got our audio.append frames (-1: some were lost)
    sampleRate: MIC_RATE,
    unsent: [], // Int16Array pieces not yet appended
    unsentSamples: 0,
    chunks: [], // every byte recorded (Uint8Array pieces), for an inline resend
    samples: 0,
  };

  async function startMic() {
    if (!navigator.mediaDevices || !navigator.mediaDevices.getUserMedia) {
      showBanner("the microphone needs https (or localhost)");
      return;
    }
    if (!conn.ready) {
      showBanner("not connected");
      return;
    }
    let stream;
    try {
      stream = await navigator.mediaDevices.getUserMedia({
        audio: { channelCount: 1, echoCancellation: true, noiseSuppression: true },
      });
    } catch (err) {
      showBanner(`microphone: ${err.message || err}`);
      return;
    }
    player.unlock();
    const ctx = new AudioContext();
    const source = ctx.createMediaStreamSource(stream);
    // ScriptProcessor: deprecated but everywhere, and an AudioWorklet would need one more file
    const processor = ctx.createScriptProcessor(4096, 1, 1);
    mic.sampleRate = Math.min(MIC_RATE, Math.round(ctx.sampleRate));
    const downsampler = new Downsampler(ctx.sampleRate, mic.sampleRate);
    Object.assign(mic, {
      recording: true,
      stream,
      ctx,
      nodes: [source, processor],
      streamId: randomId("mic"),
      session: hook.sessions,
      unsent: [],
      unsentSamples: 0,
      chunks: [],
      samples: 0,
    });
    hook.micSeconds = 0;
    send({ type: "audio.clear", stream_id: mic.streamId });
    processor.onaudioprocess = (event) => {
      if (!mic.recording) return;
      const pcm = downsampler.push(event.inputBuffer.getChannelData(0));
      mic.unsent.push(pcm);
      mic.unsentSamples += pcm.length;
      mic.samples += pcm.length;
      hook.micSeconds = mic.samples / mic.sampleRate;
      if (mic.unsentSamples >= MIC_SEND_SAMPLES) flushMic();
      if (mic.samples >= MIC_MAX_S * mic.sampleRate) stopMic();
    };
    source.connect(processor);
    processor.connect(ctx.destination); // it only runs when connected; it outputs silence
    ui.mic.setAttribute("aria-pressed", "true");
  }

  function flushMic() {
    if (mic.unsentSamples === 0) return;
    const joined = new Int16Array(mic.unsentSamples);
    let at = 0;
    for (const piece of mic.unsent) {
      joined.set(piece, at);
      at += piece.length;
    }
    mic.unsent = [];
    mic.unsentSamples = 0;
    const bytes = pcmBytes(joined);
    mic.chunks.push(bytes);
    const sent = send({ type: "audio.append", stream_id: mic.streamId, data: bytesToBase64(bytes) });
    if (!sent || mic.session !== hook.sessions) mic.session = -1; // the stream is incomplete
  }

  function stopMic() {
    if (!mic.recording) return;
    mic.recording = false;
    flushMic();
    for (const node of mic.nodes) node.disconnect();
    for (const track of mic.stream.getTracks()) track.stop();
    mic.ctx.close();
    ui.mic.setAttribute("aria-pressed", "false");
    if (mic.samples < mic.sampleRate / 4) return; // a click, not a question
    const pcm = new Uint8Array(mic.samples * 2);
    let at = 0;
    for (const chunk of mic.chunks) {
      pcm.set(chunk, at);
      at += chunk.length;
    }
    const seconds = (mic.samples / mic.sampleRate).toFixed(1);
    newTurn({
      question: "",
      audio: { streamId: mic.streamId, session: mic.session, pcm, sampleRate: mic.sampleRate },
      label: `(voice message, ${seconds} s)`,
    });
  }

  // ---- wiring ------------------------------------------------------------------------------
  ui.composer.addEventListener("submit", (event) => {
    event.preventDefault();
    sendComposer();
  });
  ui.input.addEventListener("keydown", (event) => {
    if (event.key === "Enter" && !event.shiftKey && !event.isComposing) {
      event.preventDefault();
      sendComposer();
    }
  });
  ui.stop.addEventListener("click", stopAnswers);
  ui.mic.addEventListener("click", () => (mic.recording ? stopMic() : startMic()));
  ui.image.addEventListener("change", () => {
    const file = ui.image.files && ui.image.files[0];
    ui.image.value = "";
    attachImage(file);
  });
  ui.speech.addEventListener("change", () => setSpeech(ui.speech.checked));
  ui.newChat.addEventListener("click", newChat);
  ui.auth.addEventListener("submit", (event) => {
    event.preventDefault();
    const token = ui.token.value.trim();
    if (!token) return;
    conn.token = token;
    sessionStorage.setItem(TOKEN_KEY, token);
    ui.token.value = "";
    if (conn.ws) conn.ws.close();
    conn.ws = null;
    conn.attempts = 0;
    connect();
  });

  connect();
})();
