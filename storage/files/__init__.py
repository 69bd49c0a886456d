"""The workspace's files, written so a crash loses nothing: layout and safe paths, atomic writes, the intent
journal and recovery, locks, checkpoints, conversations, day pages and the jobs' own records."""
