"""RSI/DayZero-v0's machinery: hidden checks of a new architecture's loader, cost model and block."""
