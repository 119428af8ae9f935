"""What config.py's classes are made of besides their own declarations.

shared  the fields several configs declare alike (`SHARED_FIELDS`, `shared`, `with_shared`), with their help
checks  the checks each config's `__post_init__` runs on its own fields, and its batches in TRL's terms
"""
