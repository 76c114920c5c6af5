from typing import Any

class POLL_EVENT_TYPE:
    READ: int
    WRITE: int
    ERROR: int

def __getattr__(name: str) -> Any: ...
