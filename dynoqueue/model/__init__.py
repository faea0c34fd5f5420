"""The data model, free of I/O: messages and their codec, key names, shards, settings, checks."""
