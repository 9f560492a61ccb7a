"""Codecs: RGB video, depth video incl. legacy layouts (file_format.md §8, DESIGN §3), force
matrices (§7.2.1), SLAM pose math (§3.1) and clocks (§7.3). They import nothing of ours but ``errors``."""
