"""Task-level and episode-level metadata documents (file_format.md §3–§7.5).

Every writer here is atomic (temp + fsync + os.replace, DESIGN §5); the
read-modify-write of ``info.json`` and ``stats.json`` happens under the task lock.
"""
