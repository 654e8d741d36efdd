"""What every typed option of the run builds on.

errors.py    `ConfigError`, the one error of a bad config, and `require`, the check that raises it
defaults.py  the packaged defaults (config/masopd_trainer.yaml) read without a composed config
"""
