"""Device-to-device (D2D) graphs for decentralized algorithms.

Nodes are clients 0..n-1; an edge is a D2D link with attributes ``rate_bps`` and
``latency_s``. Random graphs draw their networkx seeds and node positions from the
caller's numpy Generator, so a graph is a deterministic function of the rng state.

Edge-list files hold one ``u v [rate_mbps]`` per line; ``#`` starts a comment
(``fedsim.sim.readers.read_edge_list`` reads them).
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple

import networkx as nx
import numpy as np

from fedsim.sim.readers import read_edge_list

GRAPH_KINDS = ("complete", "ring", "erdos_renyi", "random_geometric", "edge_list")
MAX_DRAWS = 100  # resamples of a random graph before giving up on connectivity

D2D_HOPS = ("d2d",)
RELAY_HOPS = ("uplink", "downlink")


def build_graph(
    kind: str,
    num_nodes: int,
    rng: np.random.Generator,
    *,
    p: float = 0.3,
    radius: float = 0.3,
    edge_list_path: Path | None = None,
    ensure_connected: bool = True,
) -> nx.Graph:
    """A D2D graph on nodes 0..num_nodes-1.

    ``erdos_renyi`` keeps each edge with probability p; ``random_geometric`` places
    nodes uniformly in the unit square (node attribute ``pos``) and links those within
    radius. With ensure_connected, a random kind is redrawn up to MAX_DRAWS times
    (gossip over a disconnected graph never reaches consensus), and a disconnected
    edge-list file is an error.
    """
    if kind not in GRAPH_KINDS:
        raise ValueError(f"graph kind must be one of {GRAPH_KINDS}, got {kind!r}")
    if num_nodes < 1:
        raise ValueError(f"num_nodes must be >= 1, got {num_nodes}")
    if (edge_list_path is not None) != (kind == "edge_list"):
        raise ValueError("edge_list_path is required by, and only by, kind 'edge_list'")
    if kind == "complete":
        return nx.complete_graph(num_nodes)
    if kind == "ring":
        return nx.cycle_graph(num_nodes) if num_nodes >= 3 else nx.path_graph(num_nodes)
    if kind == "edge_list":
        graph = nx.Graph()
        graph.add_nodes_from(range(num_nodes))
        for u, v, rate_bps in read_edge_list(Path(edge_list_path), num_nodes):
            if rate_bps is None:
                graph.add_edge(u, v)
            else:
                graph.add_edge(u, v, rate_bps=rate_bps)
        if ensure_connected and not nx.is_connected(graph):
            raise ValueError(f"{edge_list_path}: the graph is disconnected")
        return graph
    if kind == "erdos_renyi":
        if not 0.0 <= p <= 1.0:
            raise ValueError(f"p must be in [0, 1], got {p}")
        knob, value = "p", p
    else:
        if radius <= 0:
            raise ValueError(f"radius must be positive, got {radius}")
        knob, value = "radius", radius
    for _ in range(MAX_DRAWS if ensure_connected else 1):
        if kind == "erdos_renyi":
            graph = nx.gnp_random_graph(num_nodes, p, seed=int(rng.integers(2**32)))
        else:
            pos = {
                node: (float(x), float(y)) for node, (x, y) in enumerate(rng.random((num_nodes, 2)))
            }
            graph = nx.random_geometric_graph(num_nodes, radius, pos=pos)
        if not ensure_connected or nx.is_connected(graph):
            return graph
    raise ValueError(
        f"{kind} graph on {num_nodes} nodes with {knob}={value} was disconnected in "
        f"{MAX_DRAWS} draws; raise {knob}"
    )


def sorted_edges(graph: nx.Graph) -> list[tuple[int, int]]:
    """Edges as (low, high) pairs in ascending order: the order rates are assigned in."""
    return sorted((min(u, v), max(u, v)) for u, v in graph.edges)


def assign_edge_rates(graph: nx.Graph, rates_bps: np.ndarray, latency_s: float = 0.0) -> None:
    """Set ``rate_bps`` and ``latency_s`` on every edge.

    rates_bps holds one rate per edge in sorted_edges order; an edge that already has
    a rate (from its edge-list file) keeps it and its entry is skipped, so the draws
    a caller makes do not depend on which edges the file fixed.
    """
    edges = sorted_edges(graph)
    if len(rates_bps) != len(edges):
        raise ValueError(f"need one rate per edge ({len(edges)}), got {len(rates_bps)}")
    if latency_s < 0:
        raise ValueError(f"latency_s must be >= 0, got {latency_s}")
    for (u, v), rate_bps in zip(edges, rates_bps, strict=True):
        attributes = graph.edges[u, v]
        if "rate_bps" not in attributes:
            if not rate_bps > 0:
                raise ValueError(f"edge {u}-{v}: rate must be positive, got {rate_bps}")
            attributes["rate_bps"] = float(rate_bps)
        attributes["latency_s"] = latency_s


def neighbours(graph: nx.Graph, node: int) -> list[int]:
    """The node's D2D neighbours, ascending (a deterministic gossip order)."""
    return sorted(graph.neighbors(node))


class PeerRoute(NamedTuple):
    """How one message travels from sender to receiver, for the network layer to time.

    Direct: ``hops == D2D_HOPS``; the message crosses the D2D edge at ``rate_bps``
    after ``latency_s``. Relayed: ``hops == RELAY_HOPS``; it goes up on the sender's
    uplink, then down on the receiver's downlink, each timed with that client's own
    link to the base station, so ``rate_bps`` is None and ``latency_s`` 0.
    """

    sender: int
    receiver: int
    hops: tuple[str, ...]
    rate_bps: float | None
    latency_s: float

    @property
    def direct(self) -> bool:
        return self.hops == D2D_HOPS


def peer_route(graph: nx.Graph | None, sender: int, receiver: int, relay: bool) -> PeerRoute:
    """A direct D2D hop if the edge exists and relay is False, else a relay via the base station.

    graph None means no D2D links at all. Multi-hop D2D forwarding is out of scope: a
    pair without an edge always goes through the base station.
    """
    if sender == receiver:
        raise ValueError(f"sender and receiver are the same node {sender}")
    if graph is not None:
        for node in (sender, receiver):
            if node not in graph:
                raise ValueError(f"node {node} is not in the graph")
    if relay or graph is None or not graph.has_edge(sender, receiver):
        return PeerRoute(sender, receiver, RELAY_HOPS, None, 0.0)
    attributes = graph.edges[sender, receiver]
    if "rate_bps" not in attributes:
        raise ValueError(f"edge {sender}-{receiver} has no rate_bps; call assign_edge_rates first")
    return PeerRoute(
        sender, receiver, D2D_HOPS, attributes["rate_bps"], attributes.get("latency_s", 0.0)
    )
