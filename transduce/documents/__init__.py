"""Users' texts and files as sentences to translate, and the translations put back in their
layout: paragraphs cut into sentences (`sentences`), plain text and HTML (`layout`), and .txt,
.html, .docx and .odt files (`files`)."""
