"""The built-in recipes' descriptions: hyperparameters, model size, what they report.

These modules import neither torch nor any model code, so the API can validate, size and
describe jobs from them; each names its `build` in ampfleet/workers/training/recipes, which
only ranks import. Registered as entry points in the group `ampfleet.recipes`.
"""
