"""Static HTML report site: figure builders (figures.py) and page assembly (site.py)."""
