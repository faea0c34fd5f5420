"""Celery apps the kombu transport tests run in real ``celery worker`` processes."""
