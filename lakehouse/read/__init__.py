"""Reads: the union read of lake and log tail, also as of log offsets (`union`), the scan of a snapshot's data
files (`filescan`), net changelogs and point lookups (`changes`), and reads planned again when maintenance
removed what they were reading (`replanning`)."""
