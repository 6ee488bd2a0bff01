-- POST the file named by $BENCH_BODY with $BENCH_CONTENT_TYPE (and $BENCH_HEADERS) to every request,
-- and print one JSON line of results (latencies in microseconds) at the end.
local file = assert(io.open(os.getenv("BENCH_BODY"), "rb"))
wrk.method = "POST"
wrk.body = file:read("*a")
file:close()
wrk.headers["Content-Type"] = os.getenv("BENCH_CONTENT_TYPE") or "application/json"
-- $BENCH_HEADERS: more headers, one "Name: value" per line (tritonclient's binary form).
for name, value in string.gmatch(os.getenv("BENCH_HEADERS") or "", "([^:\n]+):%s*([^\n]*)") do
  wrk.headers[name] = value
end

-- $BENCH_PATHS: comma-separated paths, taken in turn (many models in one server).
local paths = {}
for path in string.gmatch(os.getenv("BENCH_PATHS") or "", "[^,]+") do
  table.insert(paths, path)
end
if #paths > 0 then
  local turn = 0
  request = function()
    turn = turn % #paths + 1
    return wrk.format(nil, paths[turn])
  end
end

function done(summary, latency, requests)
  local e = summary.errors
  io.write(string.format(
    '{"requests": %d, "duration_us": %d, "p50_us": %d, "p90_us": %d, "p99_us": %d, "mean_us": %.1f, '
    .. '"errors": {"connect": %d, "read": %d, "write": %d, "status": %d, "timeout": %d}}\n',
    summary.requests, summary.duration, latency:percentile(50), latency:percentile(90),
    latency:percentile(99), latency.mean, e.connect, e.read, e.write, e.status, e.timeout))
end
