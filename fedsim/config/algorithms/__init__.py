"""The algorithms a scenario compares: one options model each, a tagged union on ``name``.

An algorithm's settings sit in the module that mirrors its own (``fedsim.algorithms.cobo``'s
in ``cobo``), beside whatever else of it the schema needs. Families share their options
through base classes, in the modules that mirror their shared round logic: a synchronous
server (``_sync``: client selection, deadline; FedAvg's server optimizer, as in FedOpt), an
asynchronous server (``_async``: staleness) and decentralized clients (``_decentralized``:
D2D rounds); every algorithm's own options (label, codecs) are ``_base``'s.

This package exports the union and its members; a family's base class or an algorithm's
helper is imported from its module. A new algorithm adds its module here and its class to
``ALGORITHMS``.
"""

from __future__ import annotations

from pydantic import BaseModel

from fedsim.config.algorithms.cfl import CflConfig
from fedsim.config.algorithms.cobo import CoboConfig
from fedsim.config.algorithms.ditto import DittoConfig
from fedsim.config.algorithms.dsgd import DsgdConfig
from fedsim.config.algorithms.fedasync import FedAsyncConfig
from fedsim.config.algorithms.fedavg import (
    FedAdagradConfig,
    FedAdamConfig,
    FedAvgConfig,
    FedAvgMConfig,
    FedYogiConfig,
)
from fedsim.config.algorithms.fedavg_ft import FedAvgFTConfig
from fedsim.config.algorithms.fedbuff import FedBuffConfig
from fedsim.config.algorithms.federico import FedericoConfig
from fedsim.config.algorithms.fedfomo import FedFomoConfig
from fedsim.config.algorithms.fedprox import FedProxConfig
from fedsim.config.algorithms.hierfavg import HierFavgConfig
from fedsim.config.algorithms.ifca import IfcaConfig
from fedsim.config.algorithms.local import LocalConfig
from fedsim.config.algorithms.oracle import OracleConfig
from fedsim.config.algorithms.perfed_ckt import PerFedCktConfig
from fedsim.config.algorithms.scaffold import ScaffoldConfig
from fedsim.config.algorithms.ucfl import UcflConfig
from fedsim.config.base import tag_of, tagged_union

ALGORITHMS = (
    LocalConfig,
    FedAvgConfig,
    FedAvgMConfig,
    FedAdagradConfig,
    FedAdamConfig,
    FedYogiConfig,
    ScaffoldConfig,
    FedProxConfig,
    FedAvgFTConfig,
    DittoConfig,
    HierFavgConfig,
    OracleConfig,
    IfcaConfig,
    CflConfig,
    FedFomoConfig,
    UcflConfig,
    PerFedCktConfig,
    FedAsyncConfig,
    FedBuffConfig,
    FedericoConfig,
    CoboConfig,
    DsgdConfig,
)
AlgorithmConfig = tagged_union(ALGORITHMS, "name")
ALGORITHM_NAMES = tuple(tag_of(model, "name") for model in ALGORITHMS)  # in error paths too
_BY_NAME = dict(zip(ALGORITHM_NAMES, ALGORITHMS, strict=True))


def algorithm_model(name: str) -> type[BaseModel]:
    """The options model of an algorithm name (``fedsim algorithms``)."""
    return _BY_NAME[name]
