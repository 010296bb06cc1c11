"""Decentralized clients' options (``fedsim.algorithms._decentralized``): D2D rounds without a
server."""

from __future__ import annotations

from typing import ClassVar, Literal

from pydantic import Field

from fedsim.config.algorithms._base import _AlgorithmBase
from fedsim.config.base import Seconds

# Whom FedeRiCo and CoBo pick their peers among: every present client (the papers' fully
# connected potential peers, the network relaying what no D2D link carries), or ``d2d``: the
# client's present D2D neighbours at the moment (``system.d2d``'s graph, or the ISLs in sight).
Peers = Literal["all", "d2d"]


class DecentralizedConfig(_AlgorithmBase):
    """No server: clients talk over D2D links (or via the base station) in lock-step rounds."""

    compressible: ClassVar[dict[str, str | None]] = {
        "uplink": "has no server: compression.peer compresses its peer messages",
        "downlink": "has no server: compression.peer compresses its peer messages",
        "peer": None,
    }

    deadline_s: Seconds | None = Field(
        default=None,
        description="close a round this long after it starts; messages still on the air are lost",
    )
