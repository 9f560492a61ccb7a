"""Codecs: RGB video, depth video (file_format.md §8, DESIGN §3). They import nothing of ours but ``errors``."""
