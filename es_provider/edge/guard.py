"""Wrong keys counted per client address and in total, for every login and token that can be guessed (the
workbench's and the access view's keys, web/login.py; the SCIM token, scim/service.py). Pure: times are given."""

from __future__ import annotations

from collections import OrderedDict, deque

# Guessing (docs/workbench.md): wrong keys one client address, and all of them together, may present per window
# (per process: `serve --workers N` allows N times the total). The address table's bound only caps memory: the
# total already bounds the addresses with a failure in the window.
GUESS_WINDOW_S = 60.0
GUESSES_PER_ADDRESS = 5
GUESSES_IN_TOTAL = 30
MAX_ADDRESSES = 1024


class Guard:
    """Key attempts in the last `window_s`, per client address and in total. An attempt counts as a failure from
    the moment it arrives until its key proves right (`forgive`), so concurrent logins cannot all be checked before
    the first is counted; a refused attempt counts nothing, so waiting out a lockout does not extend it. Pure:
    times are given."""

    def __init__(self, *, window_s: float = GUESS_WINDOW_S, per_address: int = GUESSES_PER_ADDRESS,
                 in_total: int = GUESSES_IN_TOTAL, max_addresses: int = MAX_ADDRESSES) -> None:
        self._window_s = window_s
        self._per_address = per_address
        self._in_total = in_total
        self._max_addresses = max_addresses
        self._by_address: OrderedDict[str, deque[float]] = OrderedDict()  # least recently failed first
        self._total: deque[float] = deque()

    def wait(self, address: str | None, now: float) -> float:
        """Seconds `address` (None: everybody) must wait before presenting a key; 0 when it may now."""
        horizon = now - self._window_s
        self._forget(horizon)
        waits = [self._until_free(self._total, self._in_total, now)]
        mine = self._by_address.get(address) if address is not None else None
        if mine is not None:
            _drop_until(mine, horizon)
            waits.append(self._until_free(mine, self._per_address, now))
        return max(waits)

    def try_key(self, address: str, now: float) -> float:
        """0, and the attempt counted as a failure; or the seconds to wait, counting nothing."""
        wait = self.wait(address, now)
        if wait > 0:
            return wait
        mine = self._by_address.get(address)
        if mine is None:
            if len(self._by_address) >= self._max_addresses:
                self._by_address.popitem(last=False)  # what an evicted address can still try, the total bounds
            mine = self._by_address[address] = deque()
        self._by_address.move_to_end(address)
        mine.append(now)
        self._total.append(now)
        return 0.0

    def forgive(self, address: str, attempted: float) -> None:
        """The attempt counted at `attempted` had the right key: it is no failure."""
        mine = self._by_address.get(address)
        if mine is not None and attempted in mine:
            mine.remove(attempted)
            if not mine:
                del self._by_address[address]
        if attempted in self._total:
            self._total.remove(attempted)

    def addresses(self) -> int:
        return len(self._by_address)

    def _until_free(self, stamps: deque[float], limit: int, now: float) -> float:
        if len(stamps) < limit:
            return 0.0
        return max(0.0, stamps[-limit] + self._window_s - now)  # until the limit-th newest leaves the window

    def _forget(self, horizon: float) -> None:
        _drop_until(self._total, horizon)
        while self._by_address:  # entries whose failures all left the window, least recently failed first
            address, stamps = next(iter(self._by_address.items()))
            _drop_until(stamps, horizon)
            if stamps:
                break
            del self._by_address[address]


def _drop_until(stamps: deque[float], horizon: float) -> None:
    while stamps and stamps[0] <= horizon:
        stamps.popleft()
