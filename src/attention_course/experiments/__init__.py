"""Each chapter's training runs and sweeps. They import the library; the library never imports them."""
