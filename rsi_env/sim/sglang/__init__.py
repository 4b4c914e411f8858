"""The sim tier's model of SGLang 0.5.17's scheduler: RadixAttention's prefix cache, its schedule policies,
new-token-ratio admission and retraction, chunked prefill, priced on the sim's own cost model.
"""

__all__: list[str] = []
