"""Files and folders on disk.

digest.py   sha256 of a file and of a folder's files
install.py  a finished folder installed in place of another in one rename
"""
