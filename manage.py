#!/usr/bin/env python
"""Django's command-line utility for Koord-Queue."""

import os
import sys


def main() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "portal.settings")
    from django.core.exceptions import ImproperlyConfigured

    try:
        from django.core.management import execute_from_command_line

        execute_from_command_line(sys.argv)
    except ImproperlyConfigured as exc:
        # One clear sentence instead of a traceback: the operator has something to fix.
        print(f"Koord-Queue cannot start: {exc}", file=sys.stderr)
        sys.exit(2)


if __name__ == "__main__":
    main()
