//! The Lua scripts behind the lease, liveness and presence operations: each
//! checks ownership and acts in one step, so two instances never both
//! believe they hold a room.

use std::sync::LazyLock;

/// Redis's clock in milliseconds, and the liveness of the lease value
/// `owner`: the PTTL of its node's liveness key when that key names exactly
/// this value, else -1 (gone, or another incarnation of the node). Shared by
/// the scripts below (`ARGV[3]`: the liveness key prefix).
const LIVENESS_OF: &str = r"
local function now_ms()
  local t = redis.call('TIME')
  return tonumber(t[1]) * 1000 + math.floor(tonumber(t[2]) / 1000)
end
local function alive_for(owner)
  local key = ARGV[3] .. string.match(owner, '^[^ ]*')
  if redis.call('TYPE', key).ok ~= 'hash' then return -1 end
  if redis.call('HGET', key, 'holder') ~= owner then return -1 end
  return redis.call('PTTL', key)
end
";

/// Takes the lease if free, already ours, or held by an instance whose
/// liveness key has lapsed — the last only when takeover is on (`ARGV[4]`,
/// our liveness key, non-empty) and our own key has run unbroken for the
/// grace (`ARGV[5]` ms). Returns `{owner, outcome, wait_ms}`: outcome 0 ours,
/// 1 held by a live holder (wait: its key's PTTL), 2 holder gone but we may
/// not take over yet (wait: the rest of our grace), 3 taken over.
const ACQUIRE_LEASE_BODY: &str = r"
local owner = redis.call('GET', KEYS[1])
if not owner or owner == ARGV[1] then
  redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
  return {ARGV[1], 0, 0}
end
if ARGV[4] == '' then return {owner, 1, 0} end
local lapses_in = alive_for(owner)
if lapses_in >= 0 then return {owner, 1, lapses_in} end
local mine = ARGV[4]
local grace = tonumber(ARGV[5])
if redis.call('TYPE', mine).ok ~= 'hash' or redis.call('HGET', mine, 'holder') ~= ARGV[1] then
  return {owner, 2, grace}
end
local steady_for = now_ms() - tonumber(redis.call('HGET', mine, 'since') or now_ms())
if steady_for < grace then return {owner, 2, grace - steady_for} end
redis.call('SET', KEYS[1], ARGV[1], 'PX', ARGV[2])
return {owner, 3, 0}
";

/// Who holds the lease, if not us: `{owner or false, lapses_in_ms}` where
/// lapses_in_ms is -1 for a holder whose liveness key is gone and -2 when
/// takeover is off (`ARGV[2]` empty: the holder counts as live).
const LEASE_HOLDER_BODY: &str = r"
local owner = redis.call('GET', KEYS[1])
if not owner or owner == ARGV[1] then return {false, 0} end
if ARGV[2] == '' then return {owner, -2} end
return {owner, alive_for(owner)}
";

/// Renews our liveness key (`KEYS[1]`, `ARGV[1]` our lease value, `ARGV[2]`
/// its TTL in ms); a key that lapsed or held anything else starts a new run
/// at Redis's now. Returns 1 when the key was still ours, 0 when it lapsed.
const RENEW_LIVENESS_BODY: &str = r"
local continued = 0
if redis.call('TYPE', KEYS[1]).ok == 'hash' and redis.call('HGET', KEYS[1], 'holder') == ARGV[1] then
  continued = 1
else
  redis.call('DEL', KEYS[1])
  redis.call('HSET', KEYS[1], 'holder', ARGV[1], 'since', now_ms())
end
redis.call('PEXPIRE', KEYS[1], ARGV[2])
return continued
";

/// The scripts that share [`LIVENESS_OF`], assembled once.
pub(super) static ACQUIRE_LEASE: LazyLock<String> =
    LazyLock::new(|| format!("{LIVENESS_OF}{ACQUIRE_LEASE_BODY}"));
pub(super) static LEASE_HOLDER: LazyLock<String> =
    LazyLock::new(|| format!("{LIVENESS_OF}{LEASE_HOLDER_BODY}"));
pub(super) static RENEW_LIVENESS: LazyLock<String> =
    LazyLock::new(|| format!("{LIVENESS_OF}{RENEW_LIVENESS_BODY}"));

/// Deletes our liveness key if it is still ours (`ARGV[1]` our lease value).
pub(super) const DROP_LIVENESS: &str = r"
if redis.call('TYPE', KEYS[1]).ok == 'hash' and redis.call('HGET', KEYS[1], 'holder') == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// Extends the lease only while we still own it.
pub(super) const RENEW_LEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('PEXPIRE', KEYS[1], ARGV[2])
end
return 0
";

/// Deletes the lease only while we still own it.
pub(super) const RELEASE_LEASE: &str = r"
if redis.call('GET', KEYS[1]) == ARGV[1] then
  return redis.call('DEL', KEYS[1])
end
return 0
";

/// Removes a presence entry only if it is still expired (a heartbeat may have refreshed it).
pub(super) const REMOVE_EXPIRED_PRESENCE: &str = r"
local score = redis.call('ZSCORE', KEYS[1], ARGV[1])
if score and tonumber(score) <= tonumber(ARGV[2]) then
  return redis.call('ZREM', KEYS[1], ARGV[1])
end
return 0
";
