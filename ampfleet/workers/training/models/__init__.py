"""Model architectures shared by the built-in recipes."""
