from privbandit.cli import app

app()
