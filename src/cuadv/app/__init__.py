"""The command line: cuadv caps / build / run / bench / check / simulate."""
