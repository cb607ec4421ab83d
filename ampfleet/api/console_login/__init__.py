"""Opening the console without typing a key: `ampfleet ui` asks for a one-time login token
and opens `/ui/#login=<token>`; the console exchanges it for a session of its own."""
