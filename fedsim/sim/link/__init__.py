"""Link models: what a transmitter does with the channel the radio gives it.

One module per model, each a ``base.LinkModel`` built once from its settings when the radio
is built, with its own ``transmission.RadioLink`` subclass:
- ``ideal``: Shannon's rate on the band share, nothing lost;
- ``harq``: NR transport blocks, link adaptation with an outer loop, HARQ (``adaptation``);
- ``per_upload``: an upload lost whole, once, by a packet-error draw (Chen et al. 2021);
- ``whole_transfer``: a transfer lost whole when any block it spans is in outage.
Adding a model is one module: its settings (with ``build()``), its model and transmission.
"""

from fedsim.sim.link.adaptation import Harq, HarqSettings
from fedsim.sim.link.base import LinkModel, Shannon
from fedsim.sim.link.harq import HarqLink, HarqLinkSettings
from fedsim.sim.link.ideal import Ideal, IdealSettings
from fedsim.sim.link.per_upload import PerUpload, PerUploadSettings
from fedsim.sim.link.whole_transfer import Outage, WholeTransfer, WholeTransferSettings

LinkSettings = IdealSettings | HarqLinkSettings | PerUploadSettings | WholeTransferSettings

__all__ = [
    "Harq", "HarqLink", "HarqLinkSettings", "HarqSettings", "Ideal",
    "IdealSettings", "LinkModel", "LinkSettings", "Outage", "PerUpload", "PerUploadSettings",
    "Shannon", "WholeTransfer", "WholeTransferSettings",
]  # fmt: skip
