-- POST bodies taken in turn from the file named by $BENCH_BODIES (one JSON body a line) at
-- $BENCH_RATE requests/s in all ($BENCH_THREADS wrk threads share it): each connection
-- waits for the next slot of its thread's schedule (wrk's delay()), so the rate holds
-- whatever the number of connections, as long as there are enough to fill the slots.
-- Prints one JSON line of results (latencies in microseconds) at the end, as post.lua.
local ffi = require("ffi")
ffi.cdef [[
typedef struct { long tv_sec; long tv_nsec; } bench_timespec;
int clock_gettime(int clock, bench_timespec *now);
]]
local stamp = ffi.new("bench_timespec")
local function now_ms()
  ffi.C.clock_gettime(1, stamp) -- CLOCK_MONOTONIC
  return tonumber(stamp.tv_sec) * 1000 + tonumber(stamp.tv_nsec) / 1e6
end

local bodies = {}
for line in io.lines(os.getenv("BENCH_BODIES")) do
  table.insert(bodies, line)
end
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"

local turn = 0
request = function()
  turn = turn % #bodies + 1
  return wrk.format(nil, nil, nil, bodies[turn])
end

local interval = 1000 * tonumber(os.getenv("BENCH_THREADS")) / tonumber(os.getenv("BENCH_RATE"))
local next_at = nil
function delay()
  local now = now_ms()
  if next_at == nil or next_at < now - 100 then
    next_at = now -- behind by more than 100 ms: no burst to catch up
  end
  next_at = next_at + interval
  return math.max(0, math.floor(next_at - now))
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "p50_us": %d, "p99_us": %d, '
    .. '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(99),
    e.connect, e.read, e.write, e.status, e.timeout))
end
