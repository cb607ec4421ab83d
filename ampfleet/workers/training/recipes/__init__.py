"""Built-in recipes, registered as entry points in the group `ampfleet.recipes`."""
