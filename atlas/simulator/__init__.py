"""A calibrated simulator: an analytic step-time model (features.py), a continuous-batching queue model
(queue.py), efficiencies fitted to measured results with leave-one-config-out error (fit.py), and
predictions for unmeasured points that say how far they extrapolate (predict.py)."""
