"""Text as people write it, on its way to a sentence-level model and back: HTML fragments
(`html`), and the shapes that sit between a person's text and the model's segments."""
