"""The built-in recipes' `build` functions, which ranks import; their descriptions (what the
API reads) are in ampfleet/recipes."""
