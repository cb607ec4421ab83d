"""Code bundles: users' archives of their own recipe code."""
