"""Search: measure fewer points than the full grid (grid order, random, or an Optuna study seeded by the
simulator), alone or as many workers sharing one study in a database."""


class SearchError(ValueError):
    """A search that cannot run as asked; the message is one line naming the cause."""
