-- wrk: JSON-RPC over HTTP POST, alternating two forwarded methods (the
-- gateway answers eth_chainId itself, so it is not used here). Counts
-- replies that are not a JSON-RPC result, so a fast error path cannot pass
-- for throughput.
wrk.method = "POST"
wrk.headers["Content-Type"] = "application/json"
local bodies = {
  '{"jsonrpc":"2.0","id":1,"method":"eth_blockNumber","params":[]}',
  '{"jsonrpc":"2.0","id":2,"method":"eth_getBalance","params":["0xf39Fd6e51aad88F6F4ce6aB8827279cffFb92266","latest"]}',
}
local threads = {}
setup = function(thread)
  table.insert(threads, thread)
end
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, nil, nil, bodies[(n % 2) + 1])
end
bad = 0
response = function(status, headers, body)
  if status ~= 200 or not string.find(body, '"result"', 1, true) then
    bad = bad + 1
  end
end
done = function(summary, latency, requests)
  local total_bad = 0
  for _, t in ipairs(threads) do
    total_bad = total_bad + (t:get("bad") or 0)
  end
  io.write(string.format("requests %d\np50_us %d\np99_us %d\nbad %d\n",
    summary.requests, latency:percentile(50), latency:percentile(99), total_bad))
end
