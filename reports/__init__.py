"""Reports: Altair HTML of scaling trends (issue 5; not built yet)."""
