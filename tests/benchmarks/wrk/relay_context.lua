-- A relay's browser endpoint: POST WRK_PATH (/ofrep/v1/evaluate/flags or /sdk/v1/flags) with a
-- fresh random targetingKey and country in every request and the public key (WRK_AUTH, pk_...).
-- Same user/country distribution as ../shared/bench/peers/http/wrk_unleash_ctx.lua.
dofile(os.getenv("WRK_LUA_DIR") .. "/report.lua")
local countries = {"US", "CA", "GB", "DE", "FR", "ES", "IT", "NL", "SE", "JP"}
local path = os.getenv("WRK_PATH") or "/ofrep/v1/evaluate/flags"
local headers = {
  ["Authorization"] = "Bearer " .. (os.getenv("WRK_AUTH") or ""),
  ["Content-Type"] = "application/json",
}
local counter = 0

function setup(thread)
  counter = counter + 1
  thread:set("tid", counter)
end

function init(args)
  math.randomseed(12345 + (tid or 0))
end

function request()
  local body = string.format('{"context":{"targetingKey":"u-%08x%08x","country":"%s"}}',
    math.random(0, 0x7fffffff), math.random(0, 0x7fffffff),
    countries[math.random(1, #countries)])
  return wrk.format("POST", path, headers, body)
end

done = wrk_report
