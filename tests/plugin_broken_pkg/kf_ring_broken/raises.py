"""A plugin module that raises a BaseException that is not an Exception when imported."""


class Abort(BaseException):
    """Not an Exception: `except Exception` lets it through."""


raise Abort("the ring is not configured")
