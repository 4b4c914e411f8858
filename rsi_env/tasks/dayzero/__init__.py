"""RSI/DayZero-v0: its env and the hidden checks of a new architecture's loader, cost model and block."""
