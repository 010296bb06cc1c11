"""5G NR numbers a link layer needs, from the standard: the MCS tables (TS 38.214 §5.1.3.1),
the transport block size (§5.1.3.2) and LDPC code-block segmentation (TS 38.212 §5.2.2).

One layer, one codeword, 12 subcarriers per resource block and 14 symbols per slot of which
one carries DMRS: 156 data resource elements per PRB and slot (the cap of §5.1.3.2 step 1).
"""

from __future__ import annotations

import bisect
import math
from dataclasses import dataclass

SUBCARRIERS_PER_PRB = 12
DATA_RE_PER_PRB = 156  # 12 subcarriers x (14 symbols - 1 DMRS symbol), the cap of 38.214

# (modulation order Qm, target code rate R x 1024) per MCS index.
MCS_TABLES: dict[str, tuple[tuple[int, float], ...]] = {
    "64qam": (  # TS 38.214 Table 5.1.3.1-1 (PDSCH; also PUSCH without transform precoding)
        (2, 120), (2, 157), (2, 193), (2, 251), (2, 308), (2, 379), (2, 449), (2, 526),
        (2, 602), (2, 679), (4, 340), (4, 378), (4, 434), (4, 490), (4, 553), (4, 616),
        (4, 658), (6, 438), (6, 466), (6, 517), (6, 567), (6, 616), (6, 666), (6, 719),
        (6, 772), (6, 822), (6, 873), (6, 910), (6, 948),
    ),
    "256qam": (  # TS 38.214 Table 5.1.3.1-2
        (2, 120), (2, 193), (2, 308), (2, 449), (2, 602), (4, 378), (4, 434), (4, 490),
        (4, 553), (4, 616), (4, 658), (6, 466), (6, 517), (6, 567), (6, 616), (6, 666),
        (6, 719), (6, 772), (6, 822), (6, 873), (8, 682.5), (8, 711), (8, 754), (8, 797),
        (8, 841), (8, 885), (8, 916.5), (8, 948),
    ),
}  # fmt: skip
MCS_TABLE_INDEX = {"64qam": 1, "256qam": 2}  # the tables' numbers in 38.214 (and in Sionna)

# TS 38.214 Table 5.1.3.2-1: the transport block sizes for N_info <= 3824.
SMALL_TBS = (
    24, 32, 40, 48, 56, 64, 72, 80, 88, 96, 104, 112, 120, 128, 136, 144, 152, 160, 168, 176,
    184, 192, 208, 224, 240, 256, 272, 288, 304, 320, 336, 352, 368, 384, 408, 432, 456, 480,
    504, 528, 552, 576, 608, 640, 672, 704, 736, 768, 808, 848, 888, 928, 984, 1032, 1064,
    1128, 1160, 1192, 1224, 1256, 1288, 1320, 1352, 1416, 1480, 1544, 1608, 1672, 1736, 1800,
    1864, 1928, 2024, 2088, 2152, 2216, 2280, 2408, 2472, 2536, 2600, 2664, 2728, 2792, 2856,
    2976, 3104, 3240, 3368, 3496, 3624, 3752, 3824,
)  # fmt: skip


@dataclass(frozen=True)
class Mcs:
    """One modulation and coding scheme of a table."""

    index: int
    modulation_order: int  # bits per symbol: 2 QPSK, 4 16QAM, 6 64QAM, 8 256QAM
    code_rate: float

    @property
    def spectral_efficiency(self) -> float:
        """Information bits per resource element (Qm x R)."""
        return self.modulation_order * self.code_rate


def mcs_table(name: str) -> tuple[Mcs, ...]:
    return tuple(Mcs(i, qm, r / 1024) for i, (qm, r) in enumerate(MCS_TABLES[name]))


def transport_block_bits(resource_elements: int, mcs: Mcs) -> int:
    """TBS (information bits) of one layer over ``resource_elements`` data REs (38.214
    §5.1.3.2); 0 when they carry fewer than the smallest transport block."""
    n_info = resource_elements * mcs.code_rate * mcs.modulation_order
    if n_info < 24:
        return 0
    if n_info <= 3824:
        n = max(3, math.floor(math.log2(n_info)) - 6)
        quantized = max(24, 2**n * math.floor(n_info / 2**n))
        return SMALL_TBS[bisect.bisect_left(SMALL_TBS, quantized)]
    n = math.floor(math.log2(n_info - 24)) - 5
    quantized = max(3840, 2**n * round((n_info - 24) / 2**n))
    if mcs.code_rate <= 0.25:
        blocks = math.ceil((quantized + 24) / 3816)
    elif quantized > 8424:
        blocks = math.ceil((quantized + 24) / 8424)
    else:
        return 8 * math.ceil((quantized + 24) / 8) - 24
    return 8 * blocks * math.ceil((quantized + 24) / (8 * blocks)) - 24


def code_blocks(tbs: int, code_rate: float) -> tuple[int, int]:
    """(code block size in bits with its CRC, number of code blocks) of a transport block
    (38.212 §5.2.2 with the LDPC base graph of §7.2.2)."""
    crc = 24 if tbs > 3824 else 16
    bits = tbs + crc
    base_graph_2 = tbs <= 292 or (tbs <= 3824 and code_rate <= 0.67) or code_rate <= 0.25
    max_block = 3840 if base_graph_2 else 8448
    if bits <= max_block:
        return bits, 1
    blocks = math.ceil(bits / (max_block - 24))
    return math.ceil((bits + 24 * blocks) / blocks), blocks
