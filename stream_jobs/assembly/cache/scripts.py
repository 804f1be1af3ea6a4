"""Semantic cache writes as Lua scripts, atomic: an entry, its exact key, the index, the change
log and the bound move together, and a hit is confirmed (the entry still exists, then its
counters) in one call. Key names inside the scripts are built from the tenant base, so this is
single-node Redis, not Cluster. The key layout is described in `semantic_cache`.
"""

from __future__ import annotations

# Shared by the scripts: drop(id) removes an entry, its exact key (if still its own) and its
# index member, and remembers it for the change log; keep_alive(key) lets a key live at least
# as long as the entry just written. ARGV[1..4] of every script: ttl ms, entry prefix, exact
# prefix, log length.
_LUA_COMMON = """
local ttl = tonumber(ARGV[1])
local dropped = {}
local function drop(idx, id)
  local e = ARGV[2] .. id
  local d = redis.call('HGET', e, 'x')
  if d and redis.call('GET', ARGV[3] .. d) == id then redis.call('DEL', ARGV[3] .. d) end
  redis.call('DEL', e)
  redis.call('ZREM', idx, id)
  table.insert(dropped, id)
end
local function keep_alive(key)
  if redis.call('PTTL', key) < ttl then redis.call('PEXPIRE', key, ttl) end
end
local function log(logkey, seqkey, ...)
  local n = redis.call('INCR', seqkey)
  redis.call('XADD', logkey, 'MAXLEN', '~', ARGV[4], '*', 'n', n, ...)
  keep_alive(logkey)
  keep_alive(seqkey)
end
"""

# KEYS: entry, exact, idx, log, seq, stats. ARGV[5..]: id, q, v, a, m, now ms, max entries,
# digest. Expired index members, an entry for the same query and the entries past the bound
# (closest to expiry first: the oldest, under one TTL) go. Returns the number evicted.
STORE_SCRIPT = (
    _LUA_COMMON
    + """
local now, cap = tonumber(ARGV[10]), tonumber(ARGV[11])
for _, id in ipairs(redis.call('ZRANGEBYSCORE', KEYS[3], '-inf', now)) do drop(KEYS[3], id) end
local old = redis.call('GET', KEYS[2])
if old then drop(KEYS[3], old) end
redis.call('HSET', KEYS[1], 'q', ARGV[6], 'v', ARGV[7], 'a', ARGV[8], 'm', ARGV[9],
  't', ARGV[10], 'h', 0, 'x', ARGV[12])
redis.call('PEXPIRE', KEYS[1], ttl)
redis.call('SET', KEYS[2], ARGV[5], 'PX', ttl)
redis.call('ZADD', KEYS[3], now + ttl, ARGV[5])
local evicted = 0
local excess = redis.call('ZCARD', KEYS[3]) - cap
if excess > 0 then
  for _, id in ipairs(redis.call('ZRANGE', KEYS[3], 0, excess - 1)) do
    drop(KEYS[3], id)
    evicted = evicted + 1
  end
end
keep_alive(KEYS[3])
log(KEYS[4], KEYS[5], 'add', ARGV[5], 'exp', now + ttl, 'del', table.concat(dropped, ','))
redis.call('HINCRBY', KEYS[6], 'stores', 1)
if evicted > 0 then redis.call('HINCRBY', KEYS[6], 'evictions', evicted) end
return evicted
"""
)

# KEYS: idx, log, seq. ARGV[5]: the id, or '' for all. Returns the number removed.
REMOVE_SCRIPT = (
    _LUA_COMMON
    + """
if ARGV[5] == '' then
  local ids = redis.call('ZRANGE', KEYS[1], 0, -1)
  for _, id in ipairs(ids) do drop(KEYS[1], id) end
  if #ids > 0 then log(KEYS[2], KEYS[3], 'clear', '1') end
  return #ids
end
local found = redis.call('EXISTS', ARGV[2] .. ARGV[5]) + redis.call('ZREM', KEYS[1], ARGV[5])
if found == 0 then return 0 end
drop(KEYS[1], ARGV[5])
log(KEYS[2], KEYS[3], 'del', ARGV[5])
return 1
"""
)

# KEYS: entry, stats. ARGV: model ('' for any), exact ('1'/'0').
# Returns [a, m, t, q, h] or nil when the entry is gone or is another model's.
HIT_SCRIPT = """
if redis.call('EXISTS', KEYS[1]) == 0 then return nil end
if ARGV[1] ~= '' and redis.call('HGET', KEYS[1], 'm') ~= ARGV[1] then return nil end
local h = redis.call('HINCRBY', KEYS[1], 'h', 1)
redis.call('HINCRBY', KEYS[2], 'hits', 1)
if ARGV[2] == '1' then redis.call('HINCRBY', KEYS[2], 'exact_hits', 1) end
local r = redis.call('HMGET', KEYS[1], 'a', 'm', 't', 'q')
r[5] = h
return r
"""
