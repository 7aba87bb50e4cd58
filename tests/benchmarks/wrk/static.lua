-- The same GET on every request (the trivial ceiling endpoints); JSON report at the end.
dofile(os.getenv("WRK_LUA_DIR") .. "/report.lua")
done = wrk_report
