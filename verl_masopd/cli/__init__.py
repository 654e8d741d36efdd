"""What the command-line entry points share.

args.py          argparse types: a bad value is one line naming the option
quiet_import.py  verl imported without its import-time announcements
extensions.py    `imports`: modules and files that register new workflows and estimators
run_folder.py    the Hydra run folder of a failed start, removed as far as Hydra made it
"""
