"""pytest plugin (entry point ``pytest11: chunktape``). Registered now; the fixtures arrive with the plugin issue."""
