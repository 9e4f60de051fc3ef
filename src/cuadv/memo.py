"""A bounded memo of launch pieces made once per key (checked launchers, configurations, tensor maps), shared by
the threads of a process: reads take no lock, and an insert drops the oldest entry once the memo is full."""

from __future__ import annotations

import threading
from typing import Any, Hashable


class BoundedMemo:
    """At most ``limit`` entries. ``get`` returns None for a key it does not hold; ``put`` keeps the first value
    stored for a key (a thread that made one meanwhile gets that one back), so every caller of a key uses one
    object."""

    def __init__(self, limit: int):
        self.limit = limit
        self._items: dict[Hashable, Any] = {}
        self._lock = threading.Lock()

    def get(self, key: Hashable) -> Any:
        return self._items.get(key)

    def put(self, key: Hashable, value: Any) -> Any:
        with self._lock:
            held = self._items.get(key)
            if held is not None:
                return held
            if len(self._items) >= self.limit:
                self._items.pop(next(iter(self._items)), None)
            self._items[key] = value
            return value

    def __len__(self) -> int:
        return len(self._items)
