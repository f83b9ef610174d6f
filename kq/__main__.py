from kq.cli import run

run()
