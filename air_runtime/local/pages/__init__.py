"""The run pages: routes (`routes`), what they show (`views`), who may read them (`session`)
and their Jinja2 templates (`templates/`)."""
