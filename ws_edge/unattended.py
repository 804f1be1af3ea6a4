"""Turns whose client went before they ended: still charged to their tenant.

Disconnecting never stops an answer, so it is never free: the edge that admitted a turn
keeps a route for it after its client left (its frames still reach this edge: they are
published to the accepting edge's channel), and charges the tenant when the turn ends, as
the client's door would have. A client that comes back (a resume here or elsewhere) is not
charged again: only the admitting door, or this, charges. An edge that dies with
unfinished turns does not charge them (documented in docs/routing.md).
"""

from __future__ import annotations

from functools import partial

from schemas.events import AnyEvent, TurnCompleted
from schemas.turn_log import LogPosition
from ws_edge.admission.admit import AdmissionControl
from ws_edge.relay import Deliver, RelaySubscriber


class UnattendedTurns:
    def __init__(self, relay: RelaySubscriber, admission: AdmissionControl) -> None:
        self._relay = relay
        self._admission = admission
        self._routes: dict[str, Deliver] = {}
        self.adopted = 0  # turns taken over from a client that went
        self.charged = 0

    def adopt(self, turn_id: str, estimated_tokens: int) -> None:
        """Charge the turn when it ends (`estimated_tokens`: what admission took)."""
        if turn_id in self._routes:
            return
        self.adopted += 1
        deliver = partial(self._deliver, turn_id, estimated_tokens)
        self._routes[turn_id] = deliver
        self._relay.route(turn_id, deliver)

    def _deliver(
        self, turn_id: str, estimated: int, event: AnyEvent, position: LogPosition | None
    ) -> None:
        if not isinstance(event, TurnCompleted):
            return
        deliver = self._routes.pop(turn_id, None)
        if deliver is None:
            return  # charged already (a duplicate end)
        self._relay.unroute(turn_id, deliver)
        self.charged += 1
        self._admission.charge(event, estimated)
