-- @unleash/proxy's frontend API (GET WRK_PATH, default /proxy): a fresh random userId and
-- country in every request, client key in Authorization (WRK_AUTH, default proxy-client-key).
-- The same distribution as relay_context.lua; from ../shared/bench/peers/http/wrk_unleash_ctx.lua.
dofile(os.getenv("WRK_LUA_DIR") .. "/report.lua")
local countries = {"US", "CA", "GB", "DE", "FR", "ES", "IT", "NL", "SE", "JP"}
local base = os.getenv("WRK_PATH") or "/proxy"
local hdrs = {["Authorization"] = os.getenv("WRK_AUTH") or "proxy-client-key"}
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("tid", counter)
end

function init(args)
  math.randomseed(12345 + (tid or 0))
end

function request()
  local path = string.format("%s?userId=u-%08x%08x&country=%s", base,
    math.random(0, 0x7fffffff), math.random(0, 0x7fffffff),
    countries[math.random(1, #countries)])
  return wrk.format("GET", path, hdrs)
end

done = wrk_report
