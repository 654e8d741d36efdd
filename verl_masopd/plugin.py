"""verl plugin entry point (group `verl.plugins`): `import verl` imports this module in every process.

It registers the CPU platform and the project's advantage estimators and policy losses. verl
swallows plugin import errors, so tests/unit/test_plugin_registration.py checks the registration in a fresh
interpreter.
"""

import verl_masopd.algos  # noqa: F401  (registers estimators and losses)
import verl_masopd.platform  # noqa: F401  (registers the CPU platform and the packed attention)
