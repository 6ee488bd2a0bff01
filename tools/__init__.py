"""Development tools of mlserve (not part of the installed package)."""
