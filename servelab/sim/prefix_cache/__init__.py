"""Chapter 04's simulators: prefix caching two ways, SGLang's radix tree and vLLM's hashed blocks.

Both keep the KV cache of finished requests and hand it to later requests that start with the same
tokens; they differ in granularity. ``radix_tree`` is SGLang's RadixAttention tree (Zheng et al.
2024): token-granular, a hit can end on any token, unlocked leaves are evicted least recently used
first. ``block_hash_cache`` is vLLM's automatic prefix caching: only full blocks are cached, each
found by a hash chained over its prefix, a hit is a whole number of blocks and never the whole
prompt, and the free-block queue is the LRU order. Each module names what it leaves out.
"""

from servelab.sim.prefix_cache.block_hash_cache import (
    ROOT_HASH,
    Admission,
    Block,
    BlockHash,
    BlockHashCache,
    OutOfBlocks,
    block_hashes,
    hash_block,
)
from servelab.sim.prefix_cache.radix_tree import InsertResult, LockError, MatchResult, RadixNode, RadixTree

__all__ = ["ROOT_HASH", "Admission", "Block", "BlockHash", "BlockHashCache", "InsertResult", "LockError",
           "MatchResult", "OutOfBlocks", "RadixNode", "RadixTree", "block_hashes", "hash_block"]
