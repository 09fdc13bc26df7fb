"""Serving: the FastAPI app (:func:`ragspine.serving.app.create_app`)."""
