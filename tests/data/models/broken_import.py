"""A model module that cannot be imported (for the bad-entry test)."""

import a_module_that_does_not_exist  # noqa: F401
