//! The Lua scripts of both Redis layouts. Each runs atomically on the server, so a reservation is
//! never half taken or half settled; each is sent by SHA (`EVALSHA`, loaded on first use), one
//! round trip per call.
//!
//! Scores are whole epoch seconds from the client's clock, as every other SDK writes them.

use std::sync::LazyLock;

use redis::{Cmd, Script, ToRedisArgs};

/// A call of one of these scripts being put together, sent as `EVALSHA`. Its keys are known
/// before it is sent, so a call whose keys a cluster keeps in different slots is refused
/// without a round trip, and the call can ride in a pipeline (with a `WAIT` behind it).
#[derive(Debug, Clone)]
pub(super) struct Call {
    script: &'static Script,
    keys: Vec<Vec<u8>>,
    args: Vec<Vec<u8>>,
}

impl Call {
    /// A call of `script` with no keys or arguments yet.
    pub(super) fn new(script: &'static Script) -> Self {
        Self {
            script,
            keys: Vec::new(),
            args: Vec::new(),
        }
    }

    /// Adds a key (several for a value that is a sequence).
    pub(super) fn key(&mut self, key: impl ToRedisArgs) -> &mut Self {
        self.keys.extend(key.to_redis_args());
        self
    }

    /// Adds an argument (several for a value that is a sequence).
    pub(super) fn arg(&mut self, arg: impl ToRedisArgs) -> &mut Self {
        self.args.extend(arg.to_redis_args());
        self
    }

    /// The keys it touches.
    pub(super) fn keys(&self) -> &[Vec<u8>] {
        &self.keys
    }

    /// The script, to load when the server does not know it.
    pub(super) fn script(&self) -> &'static Script {
        self.script
    }

    /// `EVALSHA <sha> <number of keys> <keys…> <arguments…>`.
    pub(super) fn command(&self) -> Cmd {
        redis::cmd("EVALSHA")
            .arg(self.script.get_hash())
            .arg(self.keys.len())
            .arg(&self.keys)
            .arg(&self.args)
            .clone()
    }
}

/// Default layout, reserve. Sweeps first, then takes up to one message per token off the head
/// of the ready list.
///
/// KEYS: ready list, processing list, deadline set. ARGV: now, sweep batch (`-1` = all),
/// the new reservations' deadline score (`+inf` allowed), then one token per message to take.
///
/// The sweep returns each reservation whose deadline lapsed to the end of the ready list, bytes
/// and `attempts` unchanged (a recovery is not an attempt on this layout), and drops every lapsed
/// member, a malformed one (shorter than 34 bytes or without `:` at byte 33) or one whose value
/// is no longer in the processing list only from the set. Each reserve moves the head into the
/// processing list and records the member `<token>:<value>`. Returns the stored values taken, in
/// queue order (none when the queue is empty).
pub(super) static RESERVE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local lapsed = redis.call('zrangebyscore', KEYS[3], '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
for _, member in ipairs(lapsed) do
    if #member >= 34 and string.byte(member, 33) == 58 then
        local value = string.sub(member, 34)
        if redis.call('lrem', KEYS[2], 1, value) == 1 then
            redis.call('rpush', KEYS[1], value)
        end
    end
    redis.call('zrem', KEYS[3], member)
end
local taken = {}
for i = 4, #ARGV do
    local value = redis.call('lmove', KEYS[1], KEYS[2], 'LEFT', 'RIGHT')
    if not value then
        break
    end
    redis.call('zadd', KEYS[3], ARGV[3], ARGV[i] .. ':' .. value)
    taken[#taken + 1] = value
end
return taken
",
    )
});

/// Default layout, settle (ack, retry, release, dead-letter), gated on the reservation's own
/// deadline member: acts only while it exists, so a late settle of a reservation that was swept
/// and delivered again touches nothing of the newer one.
///
/// KEYS: processing list, deadline set, and optionally the list to push to. ARGV: token, stored
/// value, the value to push, and `head` to push it to the head of that list instead of its end.
/// Returns 1 when it settled, 0 when it touched nothing.
pub(super) static SETTLE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('zrem', KEYS[2], ARGV[1] .. ':' .. ARGV[2]) == 0 then
    return 0
end
if KEYS[3] then
    redis.call(ARGV[4] == 'head' and 'lpush' or 'rpush', KEYS[3], ARGV[3])
end
redis.call('lrem', KEYS[1], 1, ARGV[2])
return 1
",
    )
});

/// Both layouts, extension of a reservation whose handler still runs: gives its member a new
/// deadline score, only while the member exists, so a reservation that was swept (or settled)
/// is not brought back. The member is the default layout's `<token>:<value>` in the deadline
/// set, or the Laravel layout's reserved member in `:reserved`: the structures every SDK's
/// sweep and migration read.
///
/// KEYS: the set. ARGV: the member, its new score. Returns 1 when it extended, 0 when the
/// reservation is no longer held.
pub(super) static EXTEND: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if not redis.call('zscore', KEYS[1], ARGV[1]) then
    return 0
end
redis.call('zadd', KEYS[1], ARGV[2], ARGV[1])
return 1
",
    )
});

/// Default layout, move to the end in bulk: [`SETTLE`] pushing to the tail of the queue, for
/// many reservations of one queue in one round trip, in the order given.
///
/// KEYS: processing list, deadline set, the queue. ARGV: token and stored value of each
/// reservation, in pairs. Returns, per reservation, 1 when it moved, 0 when it touched nothing.
pub(super) static SETTLE_ALL_TO_END: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local moved = {}
for i = 1, #ARGV, 2 do
    if redis.call('zrem', KEYS[2], ARGV[i] .. ':' .. ARGV[i + 1]) == 0 then
        moved[#moved + 1] = 0
    else
        redis.call('rpush', KEYS[3], ARGV[i + 1])
        redis.call('lrem', KEYS[1], 1, ARGV[i + 1])
        moved[#moved + 1] = 1
    end
end
return moved
",
    )
});

/// Laravel layout, push: the job and one wake-up token.
///
/// KEYS: ready list, notify list. ARGV: the job.
pub(super) static LARAVEL_PUSH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
redis.call('rpush', KEYS[1], ARGV[1])
redis.call('rpush', KEYS[2], 1)
return 1
",
    )
});

/// Laravel layout, pop: Laravel's migration of due `:delayed` and (when recovery is on) lapsed
/// `:reserved` members back to the ready list, byte for byte, in chunks of 100 with one notify
/// token each; then Laravel's reserve, hardened as the Python SDK does: a job that does not
/// decode, is not an object, has no numeric `attempts` or cannot be re-encoded is reserved raw.
/// Otherwise the reserved member is the job re-encoded by cjson with `attempts + 1`, exactly
/// what a Laravel worker reserves, so either side can settle the other's reservation.
///
/// KEYS: ready list, reserved set, notify list, delayed set. ARGV: now, migration batch (`-1` =
/// all), the reserved-until score (`+inf` allowed), `1` to recover lapsed reservations.
/// Returns `{job, reserved member}`, or nil when the queue is empty.
pub(super) static LARAVEL_POP: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local function migrate(from)
    local due = redis.call('zrangebyscore', from, '-inf', ARGV[1], 'LIMIT', 0, ARGV[2])
    if next(due) ~= nil then
        redis.call('zremrangebyrank', from, 0, #due - 1)
        for i = 1, #due, 100 do
            local last = math.min(i + 99, #due)
            redis.call('rpush', KEYS[1], unpack(due, i, last))
            for _ = i, last do
                redis.call('rpush', KEYS[3], 1)
            end
        end
    end
end
migrate(KEYS[4])
if ARGV[4] == '1' then
    migrate(KEYS[2])
end
local job = redis.call('lpop', KEYS[1])
if not job then
    return false
end
local reserved = job
local decoded_ok, decoded = pcall(cjson.decode, job)
if decoded_ok and type(decoded) == 'table' and type(decoded['attempts']) == 'number' then
    decoded['attempts'] = decoded['attempts'] + 1
    local encoded_ok, encoded = pcall(cjson.encode, decoded)
    if encoded_ok then
        reserved = encoded
    end
end
redis.call('zadd', KEYS[2], ARGV[3], reserved)
redis.call('lpop', KEYS[3])
return {job, reserved}
",
    )
});

/// Laravel layout, release and retry: the reservation leaves `:reserved` and the body enters
/// `:delayed` in one step, only while the reservation is still held (a reservation that lapsed
/// and was migrated back is already in the ready list; writing it again would duplicate it).
///
/// KEYS: reserved set, delayed set. ARGV: reserved member, body, available-at score.
/// Returns 1 when it settled, 0 when it touched nothing.
pub(super) static LARAVEL_RELEASE: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('zrem', KEYS[1], ARGV[1]) == 0 then
    return 0
end
redis.call('zadd', KEYS[2], ARGV[3], ARGV[2])
return 1
",
    )
});

/// Laravel layout, dead-letter and move to the end: the reservation leaves `:reserved` and the
/// body is pushed to the end of a ready list (the dead-letter queue, or the job's own queue) with
/// a wake-up token, as for any Laravel queue, in one step, only while the reservation is still
/// held.
///
/// KEYS: reserved set, target ready list, its notify list. ARGV: reserved member, body.
/// Returns 1 when it settled, 0 when it touched nothing.
pub(super) static LARAVEL_SETTLE_PUSH: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
if redis.call('zrem', KEYS[1], ARGV[1]) == 0 then
    return 0
end
redis.call('rpush', KEYS[2], ARGV[2])
redis.call('rpush', KEYS[3], 1)
return 1
",
    )
});

/// Laravel layout, move to the end in bulk: [`LARAVEL_SETTLE_PUSH`] to the reservations' own
/// ready list, for many reservations of one queue in one round trip, in the order given.
///
/// KEYS: reserved set, ready list, its notify list. ARGV: reserved member and job of each
/// reservation, in pairs. Returns, per reservation, 1 when it moved, 0 when it touched nothing.
pub(super) static LARAVEL_SETTLE_PUSH_ALL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local moved = {}
for i = 1, #ARGV, 2 do
    if redis.call('zrem', KEYS[1], ARGV[i]) == 0 then
        moved[#moved + 1] = 0
    else
        redis.call('rpush', KEYS[2], ARGV[i + 1])
        redis.call('rpush', KEYS[3], 1)
        moved[#moved + 1] = 1
    end
end
return moved
",
    )
});

/// Both layouts, removal of a selection from a list in one pass, however long the list: each
/// value given goes once, the first equal one from the head, so a value given `n` times takes
/// the first `n` equal ones and never one more. The values behind the first one removed are put
/// back in their order (a list cannot lose a value from its middle otherwise, and one `LREM` per
/// value would scan the list once per value). Atomic: a value pushed meanwhile is behind all of
/// them, and stays.
///
/// KEYS: the list. ARGV: the values to remove, one per message. Returns how many went.
pub(super) static LIST_REMOVE_ALL: LazyLock<Script> = LazyLock::new(|| {
    Script::new(
        r"
local wanted = {}
for _, value in ipairs(ARGV) do
    wanted[value] = (wanted[value] or 0) + 1
end
local values = redis.call('lrange', KEYS[1], 0, -1)
local first, behind = nil, {}
for i, value in ipairs(values) do
    local left = wanted[value]
    if left and left > 0 then
        wanted[value] = left - 1
        first = first or i
    elseif first then
        behind[#behind + 1] = value
    end
end
if not first then
    return 0
end
if first == 1 then
    redis.call('del', KEYS[1])
else
    redis.call('ltrim', KEYS[1], 0, first - 2)
end
for i = 1, #behind, 1000 do
    redis.call('rpush', KEYS[1], unpack(behind, i, math.min(i + 999, #behind)))
end
return #values - first + 1 - #behind
",
    )
});
