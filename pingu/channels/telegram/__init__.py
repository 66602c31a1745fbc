"""The Telegram channel (python-telegram-bot as a client library inside our own loop)."""
