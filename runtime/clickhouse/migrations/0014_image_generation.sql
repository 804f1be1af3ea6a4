-- Generated images in the trace (workers/imagegen, docs/imagegen.md): a turn routed to the
-- image workers (pool 'imagegen', intent 'image_generation') records how its picture was made;
-- text answers keep '' and 0.
--   image_prompt: the diffusion prompt taken from the user's words (the request words off)
--   image_width, image_height, image_steps: what was generated, after clamping to the
--       deployment's limits (image_notice says what was clamped, as the user was told)
--   image_steps_done: denoising steps run (fewer than image_steps when it was cancelled)
--   image_seed: the noise seed (the client's, or derived from the turn id: a redelivered turn
--       draws the same picture); with the prompt, size, steps and model it reproduces it
--   image_generate_ms: the pipeline's time for the image (queue_ms and e2e_ms as usual)
--   SELECT model, count(), quantile(0.5)(image_generate_ms), quantile(0.99)(e2e_ms),
--          avg(finish_reason = 'cancelled'), avg(image_notice != '')
--   FROM {db}.traces FINAL WHERE pool = 'imagegen' AND submitted_at > now() - INTERVAL 1 DAY
--   GROUP BY model
ALTER TABLE {db}.traces
    ADD COLUMN IF NOT EXISTS image_prompt String DEFAULT '' AFTER arm,
    ADD COLUMN IF NOT EXISTS image_width UInt16 AFTER image_prompt,
    ADD COLUMN IF NOT EXISTS image_height UInt16 AFTER image_width,
    ADD COLUMN IF NOT EXISTS image_steps UInt16 AFTER image_height,
    ADD COLUMN IF NOT EXISTS image_steps_done UInt16 AFTER image_steps,
    ADD COLUMN IF NOT EXISTS image_seed UInt64 AFTER image_steps_done,
    ADD COLUMN IF NOT EXISTS image_generate_ms Float64 AFTER image_seed,
    ADD COLUMN IF NOT EXISTS image_notice String DEFAULT '' AFTER image_generate_ms;
